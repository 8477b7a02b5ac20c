#!/usr/bin/python3
import sys

from fabscope.cli import main

sys.exit(main())
