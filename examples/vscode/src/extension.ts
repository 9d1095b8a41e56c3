// edit-engine for VS Code: an inline completion provider backed by the edit-engine language server.
//
// The provider sends textDocument/inlineCompletion through vscode-languageclient (so VS Code's cancellation
// token becomes $/cancelRequest). While the server denoises it sends editEngine/pass notifications; each one
// is a snapshot of the whole span, rendered here as ghost text (an `after` decoration) until the answer
// arrives and VS Code shows it as the inline suggestion. Accepting reports editEngine/accepted.
//
// Next edit (editEngine/nextEdit: the change that follows the user's recent edits, which the server keeps per
// document). VS Code's inline-edit API is proposed, not in the stable API this extension builds against
// (@types/vscode 1.85), so the edit is offered two stable ways:
//   * the command "edit-engine: Show next edit" (ctrl+alt+.) shows it: the text it replaces struck through and
//     the new text after it; Tab applies it (one undo step), asks for the next one and moves there; Escape,
//     moving the cursor or editing dismisses it. An edit that starts off screen is not drawn there: a hint at
//     the end of the cursor's line says where it is, the first Tab moves the cursor there and draws it, the
//     second applies it (nothing is applied that was not on screen); an edit in another open document is a hint
//     that names it, the first Tab opens that document there and draws the edit, the second applies it;
//   * a code action, "Apply next edit" (refactor.rewrite), runs the server's command editEngine.applyNextEdit,
//     which sends the edit back as workspace/applyEdit.
import * as vscode from "vscode";
import {
  LanguageClient,
  LanguageClientOptions,
  ServerOptions,
  TransportKind,
} from "vscode-languageclient/node";

interface LspPosition {
  line: number;
  character: number;
}
interface LspRange {
  start: LspPosition;
  end: LspPosition;
}
interface PassParams {
  requestId: number | string;
  uri: string;
  version: number;
  passIndex: number;
  final: boolean;
  range: LspRange;
  text: string;
  masked: number;
}
interface InlineItem {
  insertText: string | { value: string };
  range?: LspRange;
}
interface InlineList {
  items: InlineItem[];
}
interface NextEditResult {
  range: LspRange;
  newText: string;
  version: number;
  textDocument?: { uri: string; version: number }; // the document it edits (another open one, or the asked one)
  kind: string;
  command: { title: string; command: string; arguments: unknown[] };
}

const LANGUAGES = ["python", "javascript", "typescript", "typescriptreact", "rust", "go"];

let client: LanguageClient | undefined;
let ghost: vscode.TextEditorDecorationType | undefined;

// The server's settings are the extension's own configuration keys (package.json, whose sampler entries are
// generated from the server's one definition of each setting), less the client-side serverCommand.
let manifestKeys: string[] = [];

function settings(): Record<string, unknown> {
  const c = vscode.workspace.getConfiguration("editEngine");
  const out: Record<string, unknown> = {};
  for (const key of manifestKeys) {
    out[key] = c.get(key, null);
  }
  return out;
}

function createClient(): LanguageClient {
  const [command, ...args] = vscode.workspace
    .getConfiguration("editEngine")
    .get<string[]>("serverCommand", ["edit-engine", "lsp"]);
  const serverOptions: ServerOptions = { command, args, transport: TransportKind.stdio };
  const clientOptions: LanguageClientOptions = {
    documentSelector: LANGUAGES.map((language) => ({ scheme: "file", language })),
    initializationOptions: settings(),
    outputChannelName: "edit-engine",
  };
  return new LanguageClient("editEngine", "edit-engine", serverOptions, clientOptions);
}

function toRange(r: LspRange): vscode.Range {
  return new vscode.Range(r.start.line, r.start.character, r.end.line, r.end.character);
}

/** Show a pass as ghost text after the text it will replace (first line, the rest summarised). */
function renderPass(p: PassParams): void {
  const editor = vscode.window.activeTextEditor;
  if (!editor || !ghost || editor.document.uri.toString() !== p.uri || editor.document.version !== p.version) {
    return;
  }
  if (p.final || p.text === "") {
    editor.setDecorations(ghost, []);
    return;
  }
  const range = toRange(p.range);
  const typed = editor.document.getText(range);
  const rest = p.text.startsWith(typed) ? p.text.slice(typed.length) : p.text;
  const lines = rest.split("\n");
  const more = lines.length > 1 ? `  … +${lines.length - 1} lines` : "";
  editor.setDecorations(ghost, [
    {
      range: new vscode.Range(range.end, range.end),
      renderOptions: { after: { contentText: lines[0] + more } }, // the text so far: no placeholders
    },
  ]);
}

function clearGhost(): void {
  const editor = vscode.window.activeTextEditor;
  if (editor && ghost) {
    editor.setDecorations(ghost, []);
  }
}

// ------------------------------------------------------------------------------------------ next edit
const NEXT_EDIT = "editEngine/nextEdit";
const SHOWN_CONTEXT = "editEngine.nextEditShown";

let oldText: vscode.TextEditorDecorationType | undefined;
let newText: vscode.TextEditorDecorationType | undefined;
// The edit shown, with the document version and the cursor it is shown for; `far`: only the hint to it is;
// `target`: the edit is in that other document (at that version), and the hint names it.
let shown:
  | {
      editor: vscode.TextEditor;
      version: number;
      cursor: vscode.Position;
      range: vscode.Range;
      text: string;
      far: boolean;
      target?: { uri: string; version: number };
    }
  | undefined;
let asking: vscode.CancellationTokenSource | undefined;

async function askNextEdit(
  document: vscode.TextDocument,
  position: vscode.Position,
  token?: vscode.CancellationToken,
): Promise<NextEditResult | null> {
  if (!client) {
    return null;
  }
  const params = {
    textDocument: { uri: document.uri.toString(), version: document.version },
    position: { line: position.line, character: position.character },
    otherDocuments: true, // this client shows an edit in another document as a hint, then opens it
  };
  try {
    return await client.sendRequest<NextEditResult | null>(NEXT_EDIT, params, token);
  } catch (e) {
    return null; // cancelled (-32800), stale (-32801) or refused: nothing to propose
  }
}

function dismissNextEdit(): void {
  asking?.cancel();
  asking = undefined;
  if (shown && oldText && newText) {
    shown.editor.setDecorations(oldText, []);
    shown.editor.setDecorations(newText, []);
  }
  shown = undefined;
  void vscode.commands.executeCommand("setContext", SHOWN_CONTEXT, false);
}

/** Ask for the next edit at the cursor and show it (`jump`: move the cursor to it first). */
async function showNextEdit(jump: boolean): Promise<void> {
  const editor = vscode.window.activeTextEditor;
  if (!editor || !oldText || !newText) {
    return;
  }
  dismissNextEdit();
  const source = new vscode.CancellationTokenSource();
  asking = source;
  const document = editor.document;
  const version = document.version;
  const result = await askNextEdit(document, editor.selection.active, source.token);
  if (asking !== source || source.token.isCancellationRequested || document.version !== version) {
    return;
  }
  asking = undefined;
  if (!result) {
    vscode.window.setStatusBarMessage("edit-engine: no next edit", 3000);
    return;
  }
  const range = toRange(result.range);
  const target = result.textDocument;
  if (target && target.uri !== document.uri.toString()) {
    const cursor = editor.selection.active;
    const end = editor.document.lineAt(cursor.line).range.end;
    const name = vscode.Uri.parse(target.uri).path.split("/").pop();
    editor.setDecorations(newText, [
      {
        range: new vscode.Range(end, end),
        renderOptions: { after: { contentText: `  → next edit in ${name} at line ${range.start.line + 1}: Tab goes there` } },
      },
    ]);
    shown = { editor, version, cursor, range, text: result.newText, far: true, target };
    await vscode.commands.executeCommand("setContext", SHOWN_CONTEXT, true);
    return;
  }
  const onScreen = editor.visibleRanges.some((r) => r.contains(range.start));
  if (!onScreen) {
    const cursor = editor.selection.active;
    const arrow = range.start.line < cursor.line ? "↑" : "↓";
    const end = editor.document.lineAt(cursor.line).range.end;
    editor.setDecorations(newText, [
      {
        range: new vscode.Range(end, end),
        renderOptions: { after: { contentText: `  ${arrow} next edit at line ${range.start.line + 1}: Tab goes there` } },
      },
    ]);
    shown = { editor, version, cursor, range, text: result.newText, far: true };
  } else {
    if (jump) {
      editor.selection = new vscode.Selection(range.start, range.start);
    }
    shown = { editor, version, cursor: editor.selection.active, range, text: result.newText, far: false };
    drawNextEdit(editor, range, result.newText);
  }
  await vscode.commands.executeCommand("setContext", SHOWN_CONTEXT, true);
}

/** The text the edit replaces struck through, the new text after it. */
function drawNextEdit(editor: vscode.TextEditor, range: vscode.Range, text: string): void {
  if (!oldText || !newText) {
    return;
  }
  editor.revealRange(range, vscode.TextEditorRevealType.InCenterIfOutsideViewport);
  const lines = text.replace(/\n$/, "").split("\n"); // a final line break ends the last line
  const more = lines.length > 1 ? `  … +${lines.length - 1} lines` : "";
  // After the last replaced character: a range of whole lines ends at the start of the row below it.
  const end =
    range.end.character === 0 && range.end.line > range.start.line
      ? editor.document.lineAt(range.end.line - 1).range.end
      : range.end;
  editor.setDecorations(oldText, [range]);
  editor.setDecorations(newText, [
    {
      range: new vscode.Range(end, end),
      renderOptions: { after: { contentText: ` → ${lines[0].trim()}${more}` } },
    },
  ]);
}

/** Apply the edit shown (one undo step), then ask for the next one and move there; an edit off screen (its
 * hint shown) is not applied: the cursor moves to it and it is drawn. */
async function acceptNextEdit(): Promise<void> {
  const edit = shown;
  if (!edit || edit.editor.document.version !== edit.version) {
    dismissNextEdit();
    return;
  }
  if (edit.target) {
    // In another document: open it, move there and draw the edit; the next Tab applies it. An answer for a
    // version of that document other than the one open is dropped.
    const target = edit.target;
    dismissNextEdit();
    let document: vscode.TextDocument;
    try {
      document = await vscode.workspace.openTextDocument(vscode.Uri.parse(target.uri));
    } catch (e) {
      vscode.window.setStatusBarMessage("edit-engine: the next edit's document cannot be opened", 3000);
      return;
    }
    if (document.version !== target.version) {
      vscode.window.setStatusBarMessage("edit-engine: the next edit's document changed; ask again", 3000);
      return;
    }
    const editor = await vscode.window.showTextDocument(document);
    editor.selection = new vscode.Selection(edit.range.start, edit.range.start);
    shown = { editor, version: document.version, cursor: edit.range.start, range: edit.range, text: edit.text, far: false };
    drawNextEdit(editor, edit.range, edit.text);
    await vscode.commands.executeCommand("setContext", SHOWN_CONTEXT, true);
    return;
  }
  if (edit.far) {
    edit.far = false;
    edit.cursor = edit.range.start; // before the selection changes, so that the move does not dismiss it
    edit.editor.selection = new vscode.Selection(edit.range.start, edit.range.start);
    drawNextEdit(edit.editor, edit.range, edit.text);
    return;
  }
  dismissNextEdit();
  const applied = await edit.editor.edit((builder) => builder.replace(edit.range, edit.text));
  if (applied) {
    void client?.sendNotification("editEngine/accepted", {
      uri: edit.editor.document.uri.toString(),
      kind: "nextEdit",
      acceptedChars: edit.text.length,
    });
    await showNextEdit(true);
  }
}

/** "Apply next edit" as a code action: runs the server's editEngine.applyNextEdit (workspace/applyEdit). */
class NextEditActions implements vscode.CodeActionProvider {
  static readonly kinds = [vscode.CodeActionKind.RefactorRewrite];

  async provideCodeActions(
    document: vscode.TextDocument,
    range: vscode.Range | vscode.Selection,
    context: vscode.CodeActionContext,
    token: vscode.CancellationToken,
  ): Promise<vscode.CodeAction[]> {
    if (context.only && !context.only.contains(vscode.CodeActionKind.RefactorRewrite)) {
      return [];
    }
    const result = await askNextEdit(document, range.start, token);
    if (!result || token.isCancellationRequested) {
      return [];
    }
    const action = new vscode.CodeAction("Apply next edit (edit-engine)", vscode.CodeActionKind.RefactorRewrite);
    action.command = {
      title: result.command.title,
      command: result.command.command,
      arguments: result.command.arguments,
    };
    return [action];
  }
}

class Provider implements vscode.InlineCompletionItemProvider {
  async provideInlineCompletionItems(
    document: vscode.TextDocument,
    position: vscode.Position,
    context: vscode.InlineCompletionContext,
    token: vscode.CancellationToken,
  ): Promise<vscode.InlineCompletionItem[]> {
    if (!client) {
      return [];
    }
    const params = {
      textDocument: { uri: document.uri.toString() },
      position: { line: position.line, character: position.character },
      context: { triggerKind: context.triggerKind === vscode.InlineCompletionTriggerKind.Invoke ? 1 : 2 },
    };
    try {
      const result = await client.sendRequest<InlineList | null>("textDocument/inlineCompletion", params, token);
      if (!result || token.isCancellationRequested) {
        return [];
      }
      return result.items.map((item) => {
        const text = typeof item.insertText === "string" ? item.insertText : item.insertText.value;
        const range = item.range ? toRange(item.range) : new vscode.Range(position, position);
        const out = new vscode.InlineCompletionItem(text, range);
        out.command = {
          command: "editEngine.accepted",
          title: "accepted",
          arguments: [document.uri.toString(), text.length],
        };
        return out;
      });
    } catch (e) {
      // Cancelled (-32800) or stale (-32801): the user kept typing; nothing to show.
      return [];
    } finally {
      clearGhost();
    }
  }
}

export async function activate(context: vscode.ExtensionContext): Promise<void> {
  const props: Record<string, unknown> = context.extension.packageJSON?.contributes?.configuration?.properties ?? {};
  manifestKeys = Object.keys(props)
    .map((k) => k.replace(/^editEngine\./, ""))
    .filter((k) => k !== "serverCommand");
  ghost = vscode.window.createTextEditorDecorationType({
    after: { color: new vscode.ThemeColor("editorGhostText.foreground"), fontStyle: "italic" },
  });
  oldText = vscode.window.createTextEditorDecorationType({
    textDecoration: "line-through",
    backgroundColor: new vscode.ThemeColor("diffEditor.removedTextBackground"),
  });
  newText = vscode.window.createTextEditorDecorationType({
    after: { color: new vscode.ThemeColor("editorGhostText.foreground"), fontStyle: "italic" },
  });
  const selector = LANGUAGES.map((language) => ({ scheme: "file", language }));
  client = createClient();
  context.subscriptions.push(
    ghost,
    oldText,
    newText,
    vscode.commands.registerCommand("editEngine.nextEdit", () => showNextEdit(false)),
    vscode.commands.registerCommand("editEngine.acceptNextEdit", () => acceptNextEdit()),
    vscode.commands.registerCommand("editEngine.dismissNextEdit", () => dismissNextEdit()),
    vscode.languages.registerCodeActionsProvider(selector, new NextEditActions(), {
      providedCodeActionKinds: NextEditActions.kinds,
    }),
    vscode.window.onDidChangeTextEditorSelection((e) => {
      const moved = e.textEditor !== shown?.editor || !e.selections[0].active.isEqual(shown.cursor);
      if (shown && moved) {
        dismissNextEdit();
      }
    }),
    vscode.window.onDidChangeActiveTextEditor((e) => {
      if (!shown || e !== shown.editor) {
        dismissNextEdit(); // (a next edit in another document opens its editor: that one keeps it)
      }
    }),
    client.onNotification("editEngine/pass", (p: PassParams) => renderPass(p)),
    vscode.languages.registerInlineCompletionItemProvider(
      LANGUAGES.map((language) => ({ scheme: "file", language })),
      new Provider(),
    ),
    vscode.commands.registerCommand("editEngine.accepted", (uri: string, acceptedChars: number) => {
      void client?.sendNotification("editEngine/accepted", { uri, kind: "accept", acceptedChars });
    }),
    vscode.commands.registerCommand("editEngine.restart", async () => {
      await client?.restart();
    }),
    vscode.workspace.onDidChangeConfiguration((e) => {
      if (e.affectsConfiguration("editEngine")) {
        void client?.sendNotification("workspace/didChangeConfiguration", { settings: { editEngine: settings() } });
      }
    }),
    vscode.workspace.onDidChangeTextDocument((e) => {
      clearGhost();
      if (shown && e.document === shown.editor.document) {
        dismissNextEdit();
      }
    }),
  );
  await client.start();
}

export async function deactivate(): Promise<void> {
  await client?.stop();
  client = undefined;
}
