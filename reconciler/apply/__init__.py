"""The write side: the steps `tune apply` takes, the engines that execute them (Python here or on a
snapshot, POSIX sh on a remote host), the journal each run keeps on its target, and rollback."""
