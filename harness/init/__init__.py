"""`leakmeter init`: a commented scenario written from a user's model file and data."""
