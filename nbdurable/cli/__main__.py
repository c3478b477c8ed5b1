"""``python -m nbdurable.cli``: the ``nbdurable`` command."""

import sys

from . import main

sys.exit(main())
