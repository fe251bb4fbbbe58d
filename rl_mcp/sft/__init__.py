"""The supervised stage as the server sees it before a run: its set built and previewed (the stage's
own process does the work; the server starts it and reads its files)."""
