# SPDX-License-Identifier: BSD-3-Clause
"""`fabscope load`: many flows at once (incast, fan-out, all-to-all, permutation), judged."""
