"""The fabric matrix: schedules of disjoint pairs, agents under the launcher, findings."""
