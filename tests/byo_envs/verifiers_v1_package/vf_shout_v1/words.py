"""The words to shout (a module beside the entry point: a package's relative imports must work)."""

WORDS = ["stop", "fire", "goal", "help", "wow", "yes"]
