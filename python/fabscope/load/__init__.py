"""`fabscope load`: many flows at once (incast, fan-out, all-to-all, permutation), judged."""
