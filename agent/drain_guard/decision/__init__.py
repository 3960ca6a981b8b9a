"""The decision (pure): the ``Decision`` classes (``decisions``), the decision table
(``decide``) and a hold's life as the agent tells it (``holds``)."""
