"""The `primuspp` command line: thin Typer verbs over the library.

The command line is its own process: it turns numpy's huge-page advice off (`primuspp.numpy_pages` says
why) before numpy is imported, unless the environment already names a choice. Processes it starts
(training ranks) inherit that; torch's own memory is not numpy's and is unaffected.
"""

import os

from primuspp.numpy_pages import HUGEPAGE_ADVICE

os.environ.setdefault(*HUGEPAGE_ADVICE)
