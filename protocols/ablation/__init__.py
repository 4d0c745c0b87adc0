"""protocol=ablation: a baseline and its optimisations one at a time and together: its plan
(the arms; ``plan``)."""
