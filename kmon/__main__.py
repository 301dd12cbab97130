"""``python -m kmon`` runs the command line."""

import sys

from kmon.cli import main

sys.exit(main())
