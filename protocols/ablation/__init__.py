"""protocol=ablation: a baseline and its optimisations one at a time and together: its plan
(the arms; ``plan``) and its record (``ablation.json``: effects, interactions, bottlenecks;
``record``)."""
