"""What the REST API and the usage pages both do, as plain functions of the :class:`~..context.WebContext` and
the :class:`~..auth.Caller`: who may do what, in which order a change is checked, and the change itself.

A REST handler calls them with its JSON body and writes their result as JSON; a page's form calls them with
its fields and shows their result, or their refusal above the form. Neither handler subclasses the other, so
each rule has one home here (pure decisions stay in the rules and the domain; these read and write the
ledger and ask the hub). A refusal is a ``web.HTTPError`` with the API's status and words.
"""
