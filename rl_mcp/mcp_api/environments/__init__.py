"""The environment tools (list, select, show and edit the config), their descriptions and resources."""
