"""Making a chosen setting permanent however the server was started; what is in force."""
