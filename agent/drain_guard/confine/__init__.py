"""What each identity may do (pure): the webhook's admission rules (``admission``), what the
node proxy passes on (``nodeaccess``), the API calls and their grants (``permissions``), and
docs/rights.md's table read (``rights``)."""
