"""`python -m primuspp`: the `primuspp` command."""

from primuspp.commands.app import entry

if __name__ == "__main__":
    entry()
