#!/usr/bin/python3
# SPDX-License-Identifier: BSD-3-Clause
import sys

from fabscope.cli import main

sys.exit(main())
