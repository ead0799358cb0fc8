"""The coverage cases behind ``python -m devtools coverage`` (``cases``: one
small program per member or feature, run on stock torch and with the plugin)
and the tables of docs/coverage.md made from them (``tables``)."""
