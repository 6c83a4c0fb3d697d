"""Expected values computed without the lab's own functions, for tests that
would otherwise compare a function with itself (records.wilson against
records.wilson): a statistic is checked against another implementation or
against its definition.
"""

from scipy.stats import binomtest  # python3-scipy, lab/install-deps


def wilson(successes, trials):
    """The 95 % Wilson score interval as the records round it (4 places), by
    scipy's implementation (scipy.stats.binomtest(...).proportion_ci), not
    lab.records'; None for no trials."""
    if trials <= 0:
        return None
    interval = binomtest(successes, trials).proportion_ci(0.95, method="wilson")
    return [round(interval.low, 4), round(interval.high, 4)]


def nearest_rank(values, fraction):
    """The nearest-rank percentile by its definition: the smallest value
    that at least `fraction` of the values are not above (no ceil)."""
    ordered = sorted(values)
    return next(value for value in ordered if sum(v <= value for v in ordered) >= fraction * len(ordered))
