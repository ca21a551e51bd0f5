"""Feature hashing of table columns and their crosses, and the fitted parameters told to people."""
