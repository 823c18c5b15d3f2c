"""The Attribution Service: `firstfault serve`, a thin HTTP layer (v2 API and v1 compatibility API) over engine
sessions. See docs/service.md."""
