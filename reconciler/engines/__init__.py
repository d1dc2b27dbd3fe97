"""tune under the engines that own a fleet: Slurm, Kubernetes, Ansible."""
