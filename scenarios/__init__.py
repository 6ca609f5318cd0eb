"""rein scenarios: dialogue tests over tau2-style domains, simulated users, grading and reports.

    from scenarios import load_scenarios, run_scenario, evaluate, RunOptions
    episode = await run_scenario(load_scenarios("scenarios/examples/mock_create_task.yaml")[0],
                                 RunOptions(model=script_model))

Names are imported on first use, so `import scenarios` stays light (no domains, no runtime).
"""

from __future__ import annotations

from agent.lazy import lazy_exports

_EXPORTS = {
    "Scenario": "scenarios.scenario",
    "load_scenarios": "scenarios.loading",
    "collect_scenarios": "scenarios.loading",
    "scenario_from_task": "scenarios.loading",
    "ScenarioFileError": "scenarios.loading",
    "RunOptions": "scenarios.orchestrator",
    "run_scenario": "scenarios.orchestrator",
    "script_model": "scenarios.orchestrator",
    "evaluate": "scenarios.grading",
    "run_batch": "scenarios.runner",
    "pass_hat_k": "scenarios.metrics",
}

__all__ = sorted(_EXPORTS)


__getattr__ = lazy_exports(__name__, _EXPORTS)
