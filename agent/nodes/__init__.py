"""The nodes of the agent graph, one module each; agent/graph.py wires them (import from there).

state.py holds what they share (the state types, GraphDeps, the event emitter), history.py the
once-per-message validation of the thread's history; intervene.py, mode.py, model.py, tools.py and
finish.py each hold one node and the router that leaves it.
"""
