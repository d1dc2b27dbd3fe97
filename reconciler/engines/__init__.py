"""What tune gives the engines that own a fleet's reboots, draining and scheduling (Slurm,
Kubernetes node agents, Ansible): files and documents they read, never a client of their API.
Above `report` and below `render`: it reads tune's records (status, pending boot) and profiles,
and the CLI prints what it returns."""
