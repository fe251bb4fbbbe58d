"""The numbers asked about (a module beside the entry point: the package's relative import must work)."""

NUMBERS = [4, 9, 12, 14, 19, 40, 90, 2024]
