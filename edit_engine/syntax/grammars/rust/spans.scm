; Node kinds the planner looks for around the cursor (edit_engine/syntax.py).
[(line_comment) (block_comment)] @comment
[(string_literal) (raw_string_literal)] @string
[(block) (declaration_list) (field_declaration_list) (match_block) (enum_variant_list)] @block
[(arguments) (parameters) (closure_parameters) (array_expression) (tuple_expression) (parenthesized_expression)
 (index_expression) (token_tree)] @brackets
[(expression_statement) (let_declaration) (function_item) (struct_item) (enum_item) (impl_item)
 (use_declaration) (const_item) (static_item) (trait_item) (mod_item)] @unit
