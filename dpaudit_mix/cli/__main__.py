"""``python -m dpaudit_mix.cli``: the command line."""

import sys

from . import main

sys.exit(main())
