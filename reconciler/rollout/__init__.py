"""Fleet rollouts of the reboot phase (and of the runtime phase): waves, canaries, a failure
budget, the operator's hooks, and a journal on the controller that `tune rollout resume` reads."""
