import type { Selectable } from 'kysely';
import type { StoredEvent } from '@trainyard/events';
import type { Database, ProjectedTable } from '../database.ts';

export type Row<T extends ProjectedTable> = Selectable<Database[T]>;

/**
 * How one table follows the log: which row an event touches, and the pure step
 * `(row, event) -> row` (`null` deletes the row, `undefined` leaves it as it was).
 */
export interface TableProjector<T extends ProjectedTable> {
  table: T;
  primaryKey: keyof Database[T] & string;
  jsonColumns: readonly (keyof Database[T] & string)[];
  keyOf(event: StoredEvent): string | null;
  apply(row: Row<T> | undefined, event: StoredEvent): Row<T> | null | undefined;
}
