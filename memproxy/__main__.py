import sys

from memproxy.cli import main

sys.exit(main())
