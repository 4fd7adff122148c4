import sys

from skyrl_gym.cli import main

sys.exit(main())
