"""The front end: a model read into HIR (the importers' shared hooks), the HIR passes, tiling, profiles, and rows sampled from a forest."""
