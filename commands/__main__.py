from primuspp.commands.app import entry

entry()
