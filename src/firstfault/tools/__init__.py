"""Tools around the engine for rule authors and evaluators: catalog verification (every inline case), corpus
evaluation, the catalog's Markdown documentation and its patterns as POSIX ERE. They use the engine; it never
uses them."""
