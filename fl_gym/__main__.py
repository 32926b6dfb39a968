"""``python -m fl_gym``: the ``fl-gym`` command, where its console script is not on the PATH."""

import sys

from fl_gym.training.cli import main

if __name__ == "__main__":
    sys.exit(main())
