# SPDX-License-Identifier: BSD-3-Clause
"""Known-good: scenario files (what a cluster should deliver), `fabscope check` (pass / warn / fail /
inconclusive per expectation, with stable fault codes) and named baselines kept in the history."""
