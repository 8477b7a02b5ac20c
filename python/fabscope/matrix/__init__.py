# SPDX-License-Identifier: BSD-3-Clause
"""The fabric matrix: schedules of disjoint pairs, agents under the launcher, findings."""
