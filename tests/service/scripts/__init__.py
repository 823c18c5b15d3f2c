"""Scripts the service tests run as a separate process (`python -m tests.service.scripts.NAME`)."""
