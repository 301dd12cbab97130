"""Developer tools: the embedded mock cluster, the demo and its workload, the fleet simulator."""
