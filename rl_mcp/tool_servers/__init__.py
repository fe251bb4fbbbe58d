"""The user's MCP tool servers, seen from the server: their tools (`listing.py`), tasks for them (`task_writing.py`)."""
