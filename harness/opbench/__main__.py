import sys

from perfwarden.harness.opbench.cli import main

sys.exit(main())
