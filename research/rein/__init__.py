"""ReIn's card-aware inception module: the agents and turns it learns from, its training, its benchmark.

    python -m research.rein.train        # build the rows, train, choose the threshold on validation
    python -m research.rein.benchmark    # the per-agent table on the test agents and the tau2 split
"""
