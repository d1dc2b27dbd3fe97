"""Step data, below both the kinds that make steps and the engines that run them: the steps and
their operations (`ops`), the journal's record types (`records`), the lines tune persists
(`persist`) and where tune keeps its state on a host (`state`)."""
