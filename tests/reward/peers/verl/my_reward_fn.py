def my_reward_fn(data_source, solution_str, ground_truth, extra_info=None):
  return len(solution_str)/100
