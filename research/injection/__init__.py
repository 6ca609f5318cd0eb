"""The injection guardrail's data, training and suite: tool results from the tau2 domains with
instructions injected, and the clean ones it must stay quiet on.

    python -m research.injection.train    # the head in interventions/data/injection_head.json
"""
