"""The `primuspp` command line: thin Typer verbs over the library."""
