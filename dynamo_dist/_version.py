"""The package's version (a leaf module: torch's precompile saves it with
every plugin guard, and ``precompile/`` reads it on load)."""

__version__ = "0.1.0"
