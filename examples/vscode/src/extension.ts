// edit-engine for VS Code: an inline completion provider backed by the edit-engine language server.
//
// The provider sends textDocument/inlineCompletion through vscode-languageclient (so VS Code's cancellation
// token becomes $/cancelRequest). While the server denoises it sends editEngine/pass notifications; each one
// is a snapshot of the whole span, rendered here as ghost text (an `after` decoration) until the answer
// arrives and VS Code shows it as the inline suggestion. Accepting reports editEngine/accepted.
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
      renderOptions: { after: { contentText: lines[0] + more + (p.masked ? " ░" : "") } },
    },
  ]);
}

function clearGhost(): void {
  const editor = vscode.window.activeTextEditor;
  if (editor && ghost) {
    editor.setDecorations(ghost, []);
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
  client = createClient();
  context.subscriptions.push(
    ghost,
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
    vscode.workspace.onDidChangeTextDocument(() => clearGhost()),
  );
  await client.start();
}

export async function deactivate(): Promise<void> {
  await client?.stop();
  client = undefined;
}
