"""The words asked about (a module beside the entry point: a package's relative imports must work)."""

WORDS = ["banana", "letter", "mississippi", "committee", "bookkeeper", "balloon", "coffee", "pepper"]
