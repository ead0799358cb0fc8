"""The package's version (a leaf module: torch's precompile saves it with
every plugin guard, and ``_compat`` reads it without importing the package)."""

__version__ = "0.1.0"
