"""The `primuspp` command line: thin Typer verbs over the library.

The command line is its own process: its process-level settings (`primuspp.commands.process`) are set
here, before numpy is imported; processes it starts (training ranks) inherit the environment.
"""

from primuspp.commands.process import set_environment

set_environment()
