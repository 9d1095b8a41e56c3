; inherits: javascript
; TypeScript's own node kinds, after JavaScript's (edit_engine/syntax.py).
[(interface_body) (enum_body)] @block
[(interface_declaration) (type_alias_declaration)] @unit
