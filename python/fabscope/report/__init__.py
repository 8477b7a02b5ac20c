# SPDX-License-Identifier: BSD-3-Clause
"""Every output format is rendered from one table model, so text, CSV, Markdown and JSON agree."""
