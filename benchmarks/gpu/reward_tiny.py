"""Reward for the tiny RL runs: the share of the ground truth's words in the completion
(graded, so a GRPO group has variance to learn from)."""


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    wanted = ground_truth.split()
    seen = set(solution_str.split())
    return sum(word in seen for word in wanted) / max(len(wanted), 1)
