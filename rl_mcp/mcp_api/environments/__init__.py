"""The environment tools (list, select, show and edit the config), their answers, views, prose and resources."""
