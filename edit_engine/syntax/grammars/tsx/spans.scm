; inherits: typescript
; TSX: TypeScript's node kinds (edit_engine/syntax.py).
