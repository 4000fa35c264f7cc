"""Commands: the router, the built-in table, help, completion, results and their text rendering."""
